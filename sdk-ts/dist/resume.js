/** The decision a resume invocation carries. */
export class Resume {
    holdId;
    resolvedBy;
    decidedItems;
    comment;
    constructor(holdId, resolvedBy, decidedItems, comment) {
        this.holdId = holdId;
        this.resolvedBy = resolvedBy;
        this.decidedItems = decidedItems;
        this.comment = comment;
    }
    static fromJson(payload) {
        const items = (payload.items ?? []).map((i) => ({
            id: i.id,
            action: i.action,
            data: i.data ?? {},
            comment: i.comment || null,
        }));
        return new Resume(payload.hold_id ?? "", payload.resolved_by ?? "", items, payload.comment || null);
    }
    /** True when nobody decided before the hold's expiry; `decidedItems` is then empty. */
    get expired() {
        return this.resolvedBy === "expired";
    }
    /** Approved or edited items; `data` is as decided, so an edit carries the new values. */
    get approved() {
        return this.decidedItems.filter((i) => i.action === "approve" || i.action === "edit");
    }
    get edited() {
        return this.decidedItems.filter((i) => i.action === "edit");
    }
    get rejected() {
        return this.decidedItems.filter((i) => i.action === "reject");
    }
    get feedback() {
        return this.decidedItems.filter((i) => i.action === "feedback");
    }
    /** The decided item with this id; throws when the hold has no such item. */
    item(id) {
        const found = this.decidedItems.find((i) => i.id === id);
        if (!found)
            throw new RangeError(`the hold has no item ${JSON.stringify(id)}`);
        return found;
    }
}
//# sourceMappingURL=resume.js.map